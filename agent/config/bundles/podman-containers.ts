/** qbee's `podman_containers`: containers kept running with podman (see containers.ts). */
import { createContainersBundle } from './containers.js';

export const podmanContainersBundle = createContainersBundle('podman');
