/** qbee's `docker_containers`: containers kept running with docker (see containers.ts). */
import { createContainersBundle } from './containers.js';

export const dockerContainersBundle = createContainersBundle('docker');
